"""The claims by section of the post, one module per group of experiments; importing this package registers
every claim.

multihead       §1      C4–C6     heads, the sqrt(d_k) scale
saturation      §1      C7, C8    softmax saturation without the scale
head_count      §1      the head-count sweep on three tasks ...
head_count_claims §1–2  C1–C3, C12–C14   ... and the claims judged on it
implementation  §2      C9–C11    shapes, the per-head loop
init_training   §2.3    C15, C16  initialisation
masks           §2.4    masks and fill values: every fill × dtype, the causal mask, two twin LMs ...
masks_claims    §2.4    C17–C20   ... and the claims judged on them
positional      §3      order blindness, extrapolation, add vs concat: the trained models ...
positional_claims §3    C21, C22, C27, C29–C31   ... and the claims judged on them
sinusoidal      §3      C23–C26, C28, C32   the sinusoidal table's and RoPE's algebra, exactly
norm_depth      §4      the norm-depth grid: Pre- vs Post-Norm vs DeepNorm across depth (most of §4) ...
norm_depth_claims §4    C33, C34, C36, C37, C39   ... and the claims judged on it
placement_claims §4     C43–C45   ... and those on Pre- vs Post-Norm
add_norm        §4      C35, C38  residual vs plain MLP, LayerNorm vs BatchNorm
layernorm_reference §4  C40–C42   the LayerNorm formula and Post-Norm against torch
block           §5      C46, C47, C49, C53   the block's shape table, tiny heads, padding, parameters
block_faults    §5      C48, C50, C51, C55   the silent bugs trained, the debugging order
ffn_width       §5.3    C52, C54  the FFN's width and overfitting
"""

from anatomy.experiments.claims import (  # noqa: F401
    add_norm,
    block,
    block_faults,
    ffn_width,
    head_count,
    head_count_claims,
    implementation,
    init_training,
    layernorm_reference,
    masks,
    masks_claims,
    multihead,
    norm_depth,
    norm_depth_claims,
    placement_claims,
    positional,
    positional_claims,
    saturation,
    sinusoidal,
)
from anatomy.experiments.registry import check_statements  # noqa: E402

check_statements()  # every entry of statements.toml has its claim (a claim without an entry fails where declared)
