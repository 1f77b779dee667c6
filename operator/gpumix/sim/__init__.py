"""A discrete-event simulator of vLLM-style serving on GPU types (issue #6).

Pure code: `engine` (one pod), `traffic` (arrivals and sizes), `routing` (Mélange App. A.2,
round robin, least loaded), `cluster` (the event loop), `report` (SLO attainment and the causes
of violations). `server` serves simulated pods in real time over HTTP; `profiler` runs Mélange
§5.3's profiling procedure against the simulator or an OpenAI-compatible endpoint.
"""
