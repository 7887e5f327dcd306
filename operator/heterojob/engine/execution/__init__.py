"""Running jobs (the execution level): a job's lifecycle decisions and its moves, growth and shrinks."""
