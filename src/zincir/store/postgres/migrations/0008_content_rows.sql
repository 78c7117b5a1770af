-- The operations rows written before 0007 (each with its whole input, and its record
-- repeating it) are converted to content stored once by Python before this step is
-- recorded, a bounded batch per transaction, so a killed migration resumes where it stopped.
SELECT 1;
