"""msop.msjob: the MSJob domain, built on the generic runtime (``msop.controller``).

- :mod:`.desired`: the objects a job should have (pods, Scheduler Service), pure;
- :mod:`.plan`: every decision, a pure function of what was observed (``Observed``),
  with :mod:`.restarts` (the restart policies) and :mod:`.children` (pods and Services);
- :mod:`.scheduling`: the seam of the systems that queue or gang-schedule a job, and its
  two implementations, :mod:`.kueue` (Kueue, with the pure Workload functions in
  :mod:`.kueue_workload`) and :mod:`.gang` (Volcano), listed in :mod:`.systems`;
- :mod:`.reconciler`: reads the caches, asks the planner, applies the Plan;
- :mod:`.doubts`: the reconciler's writes in doubt, announced once they prove stored;
- :mod:`.settings`: how the controller runs (the defaults of ``msop run``'s flags);
- :mod:`.setup`: the wiring (caches, event handlers, the controller);
- :mod:`.projection`: what of a pod or Service the caches keep;
- :mod:`.poller`: the poller of Worker 0's progress reporter;
- :mod:`.metrics`: the job counters and gauges.

This package's ``__init__`` imports nothing, so ``msop.sdk`` can use the pure modules
(``desired``, ``plan``) without loading the runtime.
"""
