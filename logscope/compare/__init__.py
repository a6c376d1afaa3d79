"""Many runs at once: `logscope scan` (CI history) and `logscope diff` (one run against another)."""
