"""The A2A leg of the pause: a run delegates to a remote agent over A2A and parks on the one
pause primitive when the remote task asks for input or authentication."""
