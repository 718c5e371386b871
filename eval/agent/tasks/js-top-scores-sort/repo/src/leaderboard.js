'use strict';

// topScores returns the n highest scores, highest first.
function topScores(scores, n = 3) {
  return [...scores].sort().reverse().slice(0, n);
}

// rank returns the players ordered by score, best first, each with its
// 1-based place.
function rank(players) {
  const order = topScores(players.map((p) => p.score), players.length);
  const left = [...players];
  return order.map((score, i) => {
    const at = left.findIndex((p) => p.score === score);
    const [player] = left.splice(at, 1);
    return { ...player, place: i + 1 };
  });
}

module.exports = { topScores, rank };
