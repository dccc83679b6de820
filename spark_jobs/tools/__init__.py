"""Read-side tools on a job's stored state: ``inspect`` (an operator's keyed state at a snapshot),
``report`` (the HTML page of a job's checkpoints) and ``protocol_demo`` (the checkpoint protocol
alone, for the CLI). They read; they change no job."""
