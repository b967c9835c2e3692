"""Operations records: the console history and maintenance job runs."""
