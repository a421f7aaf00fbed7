-- Every run that used model X: one row per run (one proxy, one agent job).
--   clickhouse-client --param_model=gpt-5 --queries-file runs_by_model.sql
-- Reads the audit lines (requests sent), deduped by log.record.uid, so it
-- counts each request once whichever paths (OTLP, file_log, both) fed the table.
SELECT
    LogAttributes['modeltap.run_id'] AS run_id,
    min(Timestamp) AS first_request,
    max(Timestamp) AS last_request,
    count() AS requests,
    uniqExact(LogAttributes['modeltap.session_id']) AS sessions,
    groupUniqArray(ResourceAttributes['service.instance.id']) AS proxies
FROM
(
    SELECT Timestamp, LogAttributes, ResourceAttributes
    FROM otel.otel_logs
    WHERE ServiceName = 'modeltap'
      AND LogAttributes['modeltap.kind'] = 'audit'
      AND LogAttributes['gen_ai.request.model'] = {model:String}
    LIMIT 1 BY LogAttributes['log.record.uid']
)
GROUP BY run_id
ORDER BY first_request
