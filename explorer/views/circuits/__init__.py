"""The Circuits panel (issue 38): attribution graphs over transcoder features."""
