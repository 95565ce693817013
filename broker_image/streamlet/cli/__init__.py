"""The `streamlet` command: its parser and `serve` (``main``), and one module per client
command and its parts (signals, output, input, each command's loop)."""
