"""benchmarks/compare.py as a package, one module a job, imported one way (each module only from those above it):

    presets      the methods and each preset's sizes, decoding and budgets (`Budget`)
    data         each task's split, program and metric (`Split`)
    metering     usage per role, counted in the engine (`MeteredEngine`, `Roles`)
    compile_details  what a compile produced besides its program (`CompileDetails`, `TfgrpoRun`, `HeldOutCheck`)
    records      the typed records between stages and in the run directory (`SeedRun`, `MethodResult`)
    methods      one compile function per optimizer (`COMPILERS`)
    evaluate     the held-out evaluation, its repeat, the prompt tokens a program adds
    prompts      which compiled programs send the same held-out prompts (one evaluation serves them all)
    store        the run directory (`RunStore`) and what its records depend on
    gate_checks  the gated run's decisions scored on the held-out rows
    summary      each method against none, paired; the repeatability of none
    markdown     the report as markdown;  plot: its PNG;  outputs: the JSON and what it records
    run          the stages of one method (`MethodRun`), resumably, and the whole comparison
    cli          the command line

and what the studies beside compare.py share (each a short declaration of programs, rows and seeds plus its
analysis), with `data` (`demo_tickets`, `held_out_tickets`) and `evaluate` (`evaluate_greedy`) above:

    paired             per-row records, accuracies, paired verdicts and their tables
    verified_compiles  a verified TrainingFreeGRPO compile's record and markdown (`TICKETS_RECIPE`)
    routing            which lesson a ticket is shown: oracle, nearest training ticket, routed learned lessons
    study              a study's result files: setup record, its sentence, JSON + markdown
"""
