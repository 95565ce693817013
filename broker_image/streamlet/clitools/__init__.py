"""The parts of the client commands (`streamlet produce|consume|streams|ping`) that are not
argument parsing: signals, output, input, each command's loop."""
