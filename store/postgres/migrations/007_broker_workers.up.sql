-- How many worker streams each broker serves, written with its last_seen: a broker that holds
-- more than another live one moves a movable worker (Hello.movable) away, so that workers even
-- out after a broker comes back, and `jobwire brokers` shows where they are.
ALTER TABLE brokers ADD COLUMN workers integer NOT NULL DEFAULT 0;
