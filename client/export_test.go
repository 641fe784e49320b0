package client

// UnreadTrailer is unreadTrailer, for the test that holds it to the broker's name.
const UnreadTrailer = unreadTrailer
