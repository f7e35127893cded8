-- Resources protected by fencing: a write lands only while the stored fence is
-- not higher than the writer's token.
CREATE TABLE resources (
    namespace     text        NOT NULL,
    resource      text        NOT NULL,
    value         bytea       NOT NULL,
    fence         bigint      NOT NULL,
    version       bigint      NOT NULL,
    operation_key text        NOT NULL,
    updated_at    timestamptz NOT NULL,
    CONSTRAINT resources_pkey PRIMARY KEY (namespace, resource)
);
