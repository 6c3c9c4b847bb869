"""Loop IR -> kernels: the fusion scheduler (groups and the decision behind each) and memory planning."""
