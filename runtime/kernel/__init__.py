"""Kernels: the relational engines that evaluate the runtime's steps."""
