"""The generation domain: the next-token distribution and streamed sampling."""
