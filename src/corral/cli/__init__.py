"""The `corral` command line: one thin module per verb group, all going through the SDK."""
