"""The audit pipeline: the grid of cells (defense x ε x paper setting), each cell trained and
attacked into its own files, the tuned values each cell looks up, resume, and the cells computed
side by side in worker processes. `privbench attack`, `privbench tune` and `privbench.testing`
call it; it reaches attacks and defenses only through their registries."""
