"""The plain data types, settings and small rules every engine layer reads (no engine imports)."""
