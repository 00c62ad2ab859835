class UserError(Exception):
    """A mistake in the user's input: printed without a traceback, exit code 2."""
