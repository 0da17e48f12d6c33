"""The Circuits domain (issue 38): transcoders and attribution graphs of the model shown."""
