"""What a run leaves on disk: the run-folder format (file names, readers, validation), the RunFolder
lifecycle (partial folder, atomic finish, identity checks), the SQLite index over an output root,
the per-run lock, and tuning checkpoints. Imports only the leaf modules."""
