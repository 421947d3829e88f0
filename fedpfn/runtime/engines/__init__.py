"""The engines that train a simulation's clients, and the program every engine runs, by concern:

    registry.py       the engines by the name `--engine` takes
    batched.py ray.py each engine: prepare (placement checked), describe (the header), run
    client_step.py    one algorithm's rules composed into one client's step
    prepared.py       a round's cohort decoded once: clients, their data, state, starts, tensors
    program.py        CohortProgram: the cohort trained as loop, threads or vmap; local_round, the ClientApp's
    sequential.py     loop and threads: one client at a time, each unvmapped
    stacked.py        vmap over stacked clients, in chunks, with the memory probe and OOM retry
    result.py         the trained cohort as replies, metrics and each client's saved state
    grid.py           the in-process Flower Grid the batched engine serves a round through
    runner.py         CohortRunner: a cohort's device, mode and chunk in this process; actors.py on Ray actors
    placement.py      one set of placement checks for every engine (actors per GPU or node)
    trees.py          per-client pytrees stacked and joined

This file imports nothing, so the ClientApp can import the program without the engines.
"""
