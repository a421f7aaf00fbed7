-- Tokens per session (this week): the provider's own counts from the response
-- events, as events.jsonl has them. Unknown is not zero: a response that did not
-- report a count is counted in *_unknown, never summed as 0. For Anthropic,
-- input_tokens excludes the cached tokens (add cache_read and cache_write for
-- all input, as the GenAI conventions count it).
--   clickhouse-client --queries-file tokens_per_session.sql
SELECT
    LogAttributes['modeltap.run_id'] AS run_id,
    LogAttributes['modeltap.session_id'] AS session_id,
    count() AS responses,
    sum(input) AS input_tokens,
    sum(output) AS output_tokens,
    sum(cache_read) AS cache_read_tokens,
    sum(cache_write) AS cache_write_tokens,
    sum(reasoning) AS reasoning_tokens,
    countIf(input IS NULL) AS input_unknown,
    countIf(output IS NULL) AS output_unknown
FROM
(
    SELECT
        LogAttributes,
        JSONExtract(Body, 'usage', 'input_tokens', 'Nullable(Int64)') AS input,
        JSONExtract(Body, 'usage', 'output_tokens', 'Nullable(Int64)') AS output,
        JSONExtract(Body, 'usage', 'cache_read_tokens', 'Nullable(Int64)') AS cache_read,
        JSONExtract(Body, 'usage', 'cache_write_tokens', 'Nullable(Int64)') AS cache_write,
        JSONExtract(Body, 'usage', 'reasoning_tokens', 'Nullable(Int64)') AS reasoning
    FROM otel.otel_logs
    WHERE ServiceName = 'modeltap'
      AND LogAttributes['modeltap.kind'] = 'response'
      AND TimestampTime >= now() - INTERVAL 7 DAY
    LIMIT 1 BY LogAttributes['log.record.uid']
)
GROUP BY run_id, session_id
ORDER BY run_id, session_id
