"""`lemon view`: a self-contained static HTML page of a results store, a run, an item or a training run.

The page is written by `lemon.files.write_output`, as every file a command writes."""
