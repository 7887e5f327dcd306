"""The fleet and its index: nodes, classes, links and what crossing them costs, rooms, filters, quota use."""
