"""The `featstore` command line (typer): thin wrappers that parse, call featstore/scorers and
print. No logic worth testing on its own lives here."""
