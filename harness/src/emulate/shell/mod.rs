//! A small POSIX shell subset over in-memory volumes (filled in by the shell work).
