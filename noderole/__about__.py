"""The version, in one place (read by hatchling and by ``noderole --version``)."""

__version__ = "0.1.0.dev0"
