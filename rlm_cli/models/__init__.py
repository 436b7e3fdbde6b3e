"""The model layer: which model to use, how each request is sent, and what the requests cost.

Modules, each importing only those above it (none imports litellm at module level):

* ``detect``: which model to use when none is configured (autodetection), and what litellm's
  bundled map says of a model (input window, whether it is priced).
* ``window``: how much of an input window a request takes (tokens per message and request, the
  room kept for the reply).
* ``llm_cache``: :class:`~rlm_cli.models.llm_cache.LLMCache`, the on-disk cache of model replies.
* ``limiter``: :class:`~rlm_cli.models.limiter.AdaptiveLimiter`, the sub-call concurrency cap.
* ``usage``: :class:`~rlm_cli.models.usage.CallRecord` and :class:`~rlm_cli.models.usage.Usage`,
  per-request usage and its totals.
* ``budget``: :class:`~rlm_cli.models.budget.Budget`, the run's limits on cost, tokens,
  sub-calls and time.
* ``failures``: what a failed request means (retry, rate limit, fatal) and the errors raised.
* ``backend``: litellm itself (:class:`~rlm_cli.models.backend.LocalBackend`): a request, a
  stream, a Router, a price.
* ``host``: the model host process that runs a ``LocalBackend`` beside rlm, and
  :class:`~rlm_cli.models.host.HostBackend`, rlm's side of it.
* ``client``: :class:`~rlm_cli.models.client.ModelClient`, the policy every request passes:
  budgets, retries, the response cache, windows, streaming.
* ``relay``: :class:`~rlm_cli.models.relay.LMHandler`, the Unix-socket server that relays the
  REPL worker's sub-calls to the client.
"""
