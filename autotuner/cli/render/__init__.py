"""What the commands print: tables and lines for a terminal, one module per command group."""
