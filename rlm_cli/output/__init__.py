"""What a run shows and writes: the terminal view on stderr, the answer and documents on stdout,
the trajectory files, and the viewers of both."""
