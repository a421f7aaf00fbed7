-- Runs whose tool catalogue changed: every turn whose tool names differ from the
-- previous turn of its session, with what was added and removed.
--   clickhouse-client --queries-file tool_catalogue_changes.sql
-- The tool names are read from the audit line itself (the body is the local
-- line); a request that sent no tools has none. Turns are ordered by seq.
WITH
    audit AS
    (
        SELECT
            LogAttributes['modeltap.run_id'] AS run_id,
            LogAttributes['modeltap.session_id'] AS session_id,
            toUInt64(LogAttributes['modeltap.seq']) AS seq,
            Timestamp,
            arraySort(JSONExtract(Body, 'tool_names', 'Array(String)')) AS tools
        FROM otel.otel_logs
        WHERE ServiceName = 'modeltap' AND LogAttributes['modeltap.kind'] = 'audit'
        LIMIT 1 BY LogAttributes['log.record.uid']
    ),
    turns AS
    (
        SELECT
            run_id,
            session_id,
            seq,
            Timestamp,
            tools,
            row_number() OVER w AS turn,
            lagInFrame(tools) OVER (w ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS previous
        FROM audit
        WINDOW w AS (PARTITION BY run_id, session_id ORDER BY seq)
    )
SELECT
    run_id,
    session_id,
    turn,
    seq,
    Timestamp,
    arrayFilter(t -> NOT has(previous, t), tools) AS added,
    arrayFilter(t -> NOT has(tools, t), previous) AS removed
FROM turns
WHERE turn > 1 AND tools != previous
ORDER BY run_id, session_id, seq
