"""The emulated cluster for tests and the demo: the Kubernetes API emulator (on kmock), simulated Nodes,
a stand-in kubelet, and the harness that starts them. Only this package needs `kmock`."""
