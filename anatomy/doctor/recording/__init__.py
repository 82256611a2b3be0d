"""The doctor's reading of one recorded forward (anatomy.tracing): projections, scale, attention cores."""
