"""The SBP protocol adapter (docs/protocols/sbp.md): a FramedConnection over the core."""
