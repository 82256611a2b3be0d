# Re-typed after datawhalechina/base-nlp code/C6/llama2/src/ (at the fetched snapshot of the course "第六章 手搓一个大模型"):
# the course lays its Llama 2 out as a package -- rope.py, norm.py, attention.py (GQA with a KV cache), ffn.py and
# transformer.py -- that import each other relatively (`from .attention import GroupedQueryAttention`). Before the
# doctor imported a file as a module of its package, `anatomy check src/model.py:LlamaTransformer` stopped at
# "attempted relative import with no known parent package".
