"""A graph break: print() runs natively between two graphs; the rest continues in a resume function."""
import torch


def fn(x):
    y = torch.cos(x) + 1
    print("between the graphs")
    return y.mean(dim=0) * 3


example_inputs = (torch.randn(4, 4),)
