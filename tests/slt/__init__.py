"""The sqllogictest runner: parser, engines, direct and incremental modes (README.md)."""
