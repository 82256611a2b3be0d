"""The doctor on a whole language model (``anatomy check my_gpt.py:GPT``): ``check.py`` runs it, ``build.py`` builds
the model, ``contract.py`` finds how it is called, ``blocks.py`` finds and diagnoses its blocks, the probe modules
look between the blocks. docs/doctor.md, "Checking a whole model"."""
