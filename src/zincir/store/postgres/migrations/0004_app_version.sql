-- The application version a run started on (AgentContext.create, WorkflowContext.open and
-- the integrations take app_version=, default $ZINCIR_APP_VERSION). NULL: unversioned, no
-- version checks. A pinned ResumeWorker claims only runs of its own version (or of one a
-- registered migration moves to it); a migration updates it with its version_migrated event.
ALTER TABLE agent_runs ADD COLUMN app_version text;
