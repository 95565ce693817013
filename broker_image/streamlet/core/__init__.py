"""The protocol-neutral stream core: what it owns and the ports through which it talks to
protocol adapters."""
