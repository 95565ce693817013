"""The protocol-neutral stream core (being extracted from streamlet.broker, issue 11): what it
owns and the ports through which it talks to protocol adapters."""
