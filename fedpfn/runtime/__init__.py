"""Running a federation: the algorithm registry, the server loop, the engines, the Flower apps,
the run folder and tracking."""
