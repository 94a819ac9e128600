"""What a node's GPUs are and how they are linked, and which transport NCCL really used.

One module per job:
    matrix     ``nvidia-smi topo -m`` parsed, and the link a run used classified; pure.
    discovery  every Ray node probed at sweep start.
    nccl_log   NCCL's ``NCCL_DEBUG=INFO`` log read for the transport it used; pure.

May import: nothing.
"""
