"""A broker's configuration: built-in defaults, a TOML file (``serve --config``), the
environment, then command-line flags, each over the one before. Every key is checked (a
misspelt one is refused, not ignored) and the whole validated before anything starts; what
cannot be used raises ConfigError, a one-line message naming the key. model.py holds the
values, reading.py reads a file, users.py the users and permissions, environment.py what the
machine adds. A further protocol's [listeners.<protocol>] is read by its adapter's settings
class, its row of broker/protocols.py (whose ``load`` reads a file with every row's). Every
key, annotated: docs/configuration.md."""
