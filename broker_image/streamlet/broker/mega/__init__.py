"""The MEGA protocol adapter (docs/protocols/mega.md): a FramedConnection over the core."""
