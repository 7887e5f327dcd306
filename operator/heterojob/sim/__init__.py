"""The simulated world: the API server emulator, a simulated fleet and a stand-in kubelet."""
