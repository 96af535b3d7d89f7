"""rtinfer.model: the model-directory contract and the token layout it fixes.

directory (what a model directory holds, validated), vocab (id ranges), sequence (the
token layout shared by training and runtime), action_tokens and obs_tokens (tokenizers).
Robot-safe: imports numpy, the standard library and rtinfer.transport; never a backend.
"""
