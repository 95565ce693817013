"""What every wire protocol shares: cutting a byte stream into frames (``framing``) and the
arena reads go into (``_arena``, in C where it was built). No protocol's codec, no sockets."""
