-- An approval's decision records who made it (free text, NULL when not said) and, for an
-- approval that runs its call with edited arguments, the digest of those arguments
-- (``args_sha256`` stays the digest of the arguments the model sent).
ALTER TABLE approvals ADD COLUMN edited_args_sha256 TEXT;
ALTER TABLE approvals ADD COLUMN decided_by TEXT;
