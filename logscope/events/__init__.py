"""Events: the signature catalogue and the typed event table."""
