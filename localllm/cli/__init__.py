"""The `localllm` command line: `main.py` builds the parser, one module per sub-command."""
