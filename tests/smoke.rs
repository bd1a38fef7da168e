mod support;
use std::time::Duration;
use lockwarden::*;
use support::RedisServer;

#[actix_rt::test]
async fn smoke() {
    let server = RedisServer::start();
    let m = LockManager::start(Config::from_url(&server.url()).unwrap()).await.unwrap();
    let g = m.send(Acquire::new("orders:42")).await.unwrap().unwrap();
    println!("token {} field {}", g.fencing_token(), g.owner_field());
    let info = m.send(Inspect::new("orders:42")).await.unwrap().unwrap();
    println!("{info:?}");
    let m2 = LockManager::start(Config::from_url(&server.url()).unwrap()).await.unwrap();
    let t = std::time::Instant::now();
    let r = m2.send(Acquire::new("orders:42").wait(Duration::ZERO)).await.unwrap();
    println!("try: {r:?} {:?}", t.elapsed());
    let waiter = actix_rt::spawn({ let m2 = m2.clone(); async move {
        let t = std::time::Instant::now();
        let g = m2.send(Acquire::new("orders:42").wait(Duration::from_secs(10))).await.unwrap().unwrap();
        println!("waiter got it after {:?}, token {}", t.elapsed(), g.fencing_token());
        g.release().await
    }});
    actix_rt::time::sleep(Duration::from_millis(200)).await;
    println!("release: {:?}", g.release().await);
    println!("again: {:?}", g.release().await);
    println!("waiter release: {:?}", waiter.await.unwrap());
    println!("stats {:?}", m.send(GetStats).await.unwrap());
}
