"""Domain kits: data loaders, programs, rewards and CLI tasks built on the core optimizer."""
