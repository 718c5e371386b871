package testenv

// StartWaiting is Start with its stop waiting wait instead of stopWait.
var StartWaiting = start
